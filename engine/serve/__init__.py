"""The built-in model server (llama.cpp behind an OpenAI API) and its experience recorder."""
