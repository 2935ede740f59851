"""The Team tab: a member's join, push, withdraw and the team school's status (controller, panel, words)."""
