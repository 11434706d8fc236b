"""The assessment items, one module per group of phases; each module's ``ITEMS`` tuple is read
by core.assessment.paper (one instance per item class)."""
