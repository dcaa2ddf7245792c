"""How close a result must be, and how close it is: tolerances, comparison, random inputs, a step's reference.

A layer below the executor and validation both: validation judges whole
runs with it, and the executor's measured builder choice
(``sigdnn.executor.autotune``) judges each candidate with the same
tolerances, without importing validation.
"""
