"""The School tab: the student, the running cycle and its report card (controller, panel, words, charts)."""
