"""One module per agent's transcript format (named by its row in capture/agents.py): its parser and recognisers."""
