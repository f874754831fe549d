"""The HTTP edge: who may ask (access), how much (limits, the h11 protocol's head deadline), what a GET may start (work), the response
cache, the request and response models, the templates, the errors' bodies and the routes' dependencies. The only part of the web app
besides routes/ and app.py that imports FastAPI or Starlette."""
