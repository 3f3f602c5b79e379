"""Jobs, schedules and sensors."""
