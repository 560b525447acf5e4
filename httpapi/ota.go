package httpapi

import "github.com/fasthttp/router"

// otaRoutes registers OTA packages and the device firmware/software download (compat §5, §1.10).
func (s *Server) otaRoutes(r *router.Router) {}
