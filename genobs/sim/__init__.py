"""Simulated vLLM /metrics exporter: catalog-driven metric families with healthy and faulty traffic."""

from .scenarios import DESCRIPTIONS, SCENARIOS
from .simulator import Simulator

__all__ = ["DESCRIPTIONS", "SCENARIOS", "Simulator"]
