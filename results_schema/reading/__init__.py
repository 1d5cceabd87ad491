"""Reading many records at once: into columns, the whole-file scan (``table_scan``) and the table it fills
(``columns``); a run's whole plan as recorded (``saved_plan``)."""
