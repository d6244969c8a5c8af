"""The metric contract: every series warptd exports (the catalog) and the families it fills."""
