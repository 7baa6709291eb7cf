"""Pure-Python decisions: the size rule, unit and table plans, batches, reports, what the sensor requests."""
