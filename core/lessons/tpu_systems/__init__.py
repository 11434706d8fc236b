"""Lesson code of the phase "TPU Systems: Generations, Memory, Precision & XProf" (one module per lesson app)."""
