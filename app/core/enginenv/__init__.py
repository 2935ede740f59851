"""The packaged app's own engine environment: a venv under the data dir with torch, transformers, PEFT, TRL and
llama-cpp-python, set up (resumably, with progress) by `setup.run`, probed at start, repaired on request."""
