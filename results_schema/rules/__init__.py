"""The rules shared by the live runner and the offline analysis, stated once over the records."""
