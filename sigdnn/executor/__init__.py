"""The executor: prepare (order, keys, plans, memory) and execute."""

from sigdnn.executor.executor import BACKENDS, Executor
from sigdnn.executor.memory_plan import MemoryPlan, plan_memory
from sigdnn.executor.plan import ExecutionPlan, Step

__all__ = ["BACKENDS", "ExecutionPlan", "Executor", "MemoryPlan", "Step", "plan_memory"]
