"""The Experience tab: the student's own work in the buffer and the teacher's corrections (controller, panel, words)."""
