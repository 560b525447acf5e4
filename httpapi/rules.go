package httpapi

import "github.com/fasthttp/router"

// ruleRoutes registers client-side RPC: device requests answered by tenant rules (compat §1.7).
func (s *Server) ruleRoutes(r *router.Router) {}
