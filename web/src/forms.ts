/** Reading submitted forms: a field's text, trimmed; '' when absent (or a file, which has no text). */
export function field(form: FormData, name: string): string {
  const value = form.get(name);
  return typeof value === 'string' ? value.trim() : '';
}
