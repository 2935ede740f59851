"""Tests of the experience buffer, teacher corrections and feedback."""
