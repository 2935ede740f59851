"""The student's own work back in class: the experience buffer, needs-improvement flags, teacher corrections."""
