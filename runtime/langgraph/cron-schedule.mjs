// Cron schedules: the five fields (minute hour day-of-month month day-of-week) with `*`, lists, ranges
// and steps, in UTC or an IANA time zone. Day of month and day of week combine as cron combines them:
// either matches when both are restricted.

const CRON_FIELDS = [
  { name: 'minute', min: 0, max: 59 },
  { name: 'hour', min: 0, max: 23 },
  { name: 'day of month', min: 1, max: 31 },
  { name: 'month', min: 1, max: 12 },
  { name: 'day of week', min: 0, max: 7 },
];

/** The schedule's allowed values per field, or an Error that says what is wrong. */
export function parseCron(schedule) {
  const parts = typeof schedule === 'string' ? schedule.trim().split(/\s+/) : [];
  if (parts.length !== 5)
    return new Error(`schedule must have five fields (minute hour day month weekday), got ${JSON.stringify(schedule)}`);
  const fields = [];
  for (const [index, part] of parts.entries()) {
    const { name, min, max } = CRON_FIELDS[index];
    const allowed = new Set();
    for (const item of part.split(',')) {
      const match = /^(\*|(\d+)(?:-(\d+))?)(?:\/(\d+))?$/.exec(item);
      if (!match) return new Error(`schedule: ${JSON.stringify(item)} is not a valid ${name}`);
      const from = match[1] === '*' ? min : Number(match[2]);
      const to = match[1] === '*' ? max : match[3] !== undefined ? Number(match[3]) : match[4] ? max : from;
      const step = match[4] ? Number(match[4]) : 1;
      if (from < min || to > max || from > to || step < 1)
        return new Error(`schedule: ${JSON.stringify(item)} is out of range for the ${name} (${min}-${max})`);
      for (let value = from; value <= to; value += step) allowed.add(index === 4 && value === 7 ? 0 : value);
    }
    fields.push({ allowed, any: part === '*' });
  }
  return fields;
}

/** The wall-clock fields of `date` in `timeZone` (UTC when none). */
function wallClock(date, timeZone) {
  if (!timeZone || timeZone === 'UTC')
    return {
      minute: date.getUTCMinutes(),
      hour: date.getUTCHours(),
      day: date.getUTCDate(),
      month: date.getUTCMonth() + 1,
      weekday: date.getUTCDay(),
    };
  const parts = Object.fromEntries(
    new Intl.DateTimeFormat('en-US', {
      timeZone,
      hourCycle: 'h23',
      minute: 'numeric',
      hour: 'numeric',
      day: 'numeric',
      month: 'numeric',
      weekday: 'short',
    })
      .formatToParts(date)
      .map((part) => [part.type, part.value]),
  );
  return {
    minute: Number(parts.minute),
    hour: Number(parts.hour),
    day: Number(parts.day),
    month: Number(parts.month),
    weekday: ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat'].indexOf(parts.weekday),
  };
}

/** The first minute after `after` that the schedule names, or null within the next five years. */
export function nextCronTime(fields, timeZone, after) {
  const [minutes, hours, days, months, weekdays] = fields;
  let candidate = new Date(Math.floor(after.getTime() / 60_000) * 60_000 + 60_000);
  const limit = after.getTime() + 5 * 366 * 86_400_000;
  while (candidate.getTime() < limit) {
    const wall = wallClock(candidate, timeZone);
    const dayMatches =
      days.any || weekdays.any
        ? days.allowed.has(wall.day) && weekdays.allowed.has(wall.weekday)
        : days.allowed.has(wall.day) || weekdays.allowed.has(wall.weekday);
    let skip;
    if (!months.allowed.has(wall.month) || !dayMatches) skip = (24 * 60 - wall.hour * 60 - wall.minute) * 60_000;
    else if (!hours.allowed.has(wall.hour)) skip = (60 - wall.minute) * 60_000;
    else if (!minutes.allowed.has(wall.minute)) skip = 60_000;
    else return candidate;
    candidate = new Date(candidate.getTime() + skip);
  }
  return null;
}
