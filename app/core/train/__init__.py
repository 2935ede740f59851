"""Training jobs: the spec the engine runs, the job lifecycle and its events, checkpoints, execution backends."""
