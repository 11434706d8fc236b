"""Lesson code of the phase "Deployment, interoperability & edge AI" (one module per lesson
app). Conversions between frameworks and formats live in interop/ (which core may not import:
the apps call it); the model service lives in core.serving."""
