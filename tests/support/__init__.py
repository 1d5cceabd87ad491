"""Test support: synthetic run directories (``synthetic``) and the load/aggregate benchmark (``bench``)."""
