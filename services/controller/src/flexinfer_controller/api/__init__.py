"""HTTP edge of the controller: the admin API."""
