"""Converters between the episode store and other formats: LeRobot v3, ROS 2 bags, legacy zarr v2."""
