// Package symshape is tlite's symbolic integer algebra for tensor shapes.
package symshape

// Expr is an immutable symbolic integer expression in canonical form.
// PLACEHOLDER: the symshape work replaces this file with the real implementation.
type Expr struct{ key string }
