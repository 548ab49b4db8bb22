// Package bnb exchanges quantized weights with bitsandbytes (the library of QLoRA and of Hugging
// Face's 4-bit and 8-bit checkpoints).
package bnb
