"""The canary model: its training task and loop, and its report card."""
