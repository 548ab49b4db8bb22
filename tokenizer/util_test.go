package tokenizer_test

import "strings"

func containsString(s, sub string) bool { return strings.Contains(s, sub) }
