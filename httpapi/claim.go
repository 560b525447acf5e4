package httpapi

import "github.com/fasthttp/router"

// claimRoutes registers device claiming: device-side claim and customer claim/unclaim (compat §3).
func (s *Server) claimRoutes(r *router.Router) {}
