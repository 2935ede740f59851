"""The job queue: scheduling jobs onto the engine by priority and policy, the inbox of dropped files, control and ETAs."""
