"""The run skeleton and the Ray layer: one run folder, its stages, checkpoints and inference."""
