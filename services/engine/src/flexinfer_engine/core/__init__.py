"""Engine logic: model, tokenizer, sampling, generation, sleep/wake. No web framework here."""
