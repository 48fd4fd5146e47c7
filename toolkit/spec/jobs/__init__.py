"""Jobs as files: finding them (built-in, the project's, a path), loading YAML and Python
jobs into a JobDefinition, the sandbox YAML prompts render in, and the user's own
classes a job names; nothing in a job file runs until it is the user's own.
"""
