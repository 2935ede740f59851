"""The Judge tab: compare, judge and promote checkpoints, and the blind test (controller, panel, blind_*)."""
