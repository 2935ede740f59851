"""The blind test: can a person tell the student's next action from the agent's? (render, draw, trials, figure)"""
