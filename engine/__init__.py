"""Engine: one subprocess per job (train / eval / export); never imports Qt."""
