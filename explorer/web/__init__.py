"""The Kernel Explorer web app: explorer.web.app builds it, explorer.web.serving serves it. Nothing here: graph worker processes import
explorer.present.expand_worker without loading FastAPI, and no module imports its own package back."""
