"""Lesson code of the phase "Workload operations" (one module per lesson app). The shared
operations library (jobs, event logs, health, faults) lives in core.workload."""
