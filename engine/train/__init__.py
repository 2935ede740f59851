"""Training jobs: the recipes, the callbacks, checkpoints, the live checker and the job's socket."""
