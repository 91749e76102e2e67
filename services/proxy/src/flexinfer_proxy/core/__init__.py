"""Framework-free proxy logic: model names, endpoints, the cold-start queue, activity."""
