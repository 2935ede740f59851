"""The XDG desktop integration: the applications-menu launcher, its icons, the *.jsonl MIME type and the login entry."""
from app.core.desktop.installer import DesktopStatus, InstallReport, UninstallReport, install, status, uninstall

__all__ = ["DesktopStatus", "InstallReport", "UninstallReport", "install", "status", "uninstall"]
