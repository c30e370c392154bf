"""Real-robot deployment: the safety layer, a gymnasium env over standard ROS 2 topics, a sim robot node serving
the MuJoCo arm behind the same topics, and the deployment node (`robot-rl deploy` / `robot-rl sim-robot`).

Modules: `safety` (SafetyFilter, Watchdog), `config` (RobotConfig, configs/robot/*.yaml), `msgs` (ROS message
conversions), `timing` (absolute-deadline rate keeping), `robot` (RobotEnv), `sim_robot`, `deploy`.
"""

from robot_rl.limits import SafetyConfig
from robot_rl.real.config import RobotConfig, load_robot_config
from robot_rl.real.safety import RobotState, SafeCommand, SafetyFilter, Watchdog

__all__ = [
    "RobotConfig",
    "RobotState",
    "SafeCommand",
    "SafetyConfig",
    "SafetyFilter",
    "Watchdog",
    "load_robot_config",
]
