"""Stubs of the model_express.* proto packages (proto/model_express/)."""
