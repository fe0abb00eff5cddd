"""The run layer: a run's folder, its stage runner, the inference pipeline on Ray, Ray tasks."""
