"""Performance diagnosis: timing, profiler traces, rooflines, rematerialization, quantization."""
