"""One-shot workers (dataset build and check, pairs, evaluation, export, smoke test): one job, then exit."""
