"""Lesson code of the phase "Self-supervised pretraining: masked and contrastive learning"
(one module per lesson app)."""
