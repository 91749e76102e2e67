"""LoRAAdapters loaded into the engines of their base Model (the adapter reconcile loop)."""
