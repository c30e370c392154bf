"""ROS 2 nodes: thin shells binding the actor/learner loop to the transport."""
