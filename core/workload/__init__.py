"""Workload operations: jobs as real processes, their event logs, health, failures and recovery.

The library of the phase "Workload operations" (core/lessons/operations/ holds each lesson's
own code). Nothing here imports marimo; servers it starts listen on 127.0.0.1 only.
"""
