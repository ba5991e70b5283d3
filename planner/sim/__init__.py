"""Trace-driven simulation with the planner's own ``plan_round``."""

from planner.sim.engine import SimConfig, SimResult, Simulator, TimelinePoint, simulate

__all__ = ["SimConfig", "SimResult", "Simulator", "TimelinePoint", "simulate"]
