"""Reading many records at once: file-kind dispatch, the derived msgspec structs and the columnar scan."""
