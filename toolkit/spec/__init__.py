"""What a run is: the Pydantic spec, how it is loaded from layers, and the job contract.

The lowest layer: nothing here imports Ray, the engines, the run or the CLI.
"""
