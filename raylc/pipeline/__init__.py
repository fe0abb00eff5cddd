"""Pipeline stages and their orchestration on Ray."""
