"""Lesson code of the phase "TPU Systems: Generations, Memory, Precision & XProf".

One module per lesson app.
"""
