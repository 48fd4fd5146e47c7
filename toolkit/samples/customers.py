"""Synthetic customer records shaped like the public datablist ``customers-2000000.csv``.

Every row is a pure function of ``(seed, Index)``: each value is drawn from a
counter-based hash of the seed, the row's Index and a per-draw stream number,
never from a sequential random stream. So any range of rows can be generated
on its own (by any worker, in any batch split) and still match the same rows
of a single large file. All work is vectorised with numpy and Arrow compute
kernels: a million rows take a couple of seconds, CSV writing included.
"""

from __future__ import annotations

import os
import pathlib
import unicodedata
import uuid
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

__all__ = [
    "CUSTOMER_COLUMNS",
    "CUSTOMER_SCHEMA",
    "customers_batch",
    "write_customers_csv",
]

CUSTOMER_COLUMNS: tuple[str, ...] = (
    "Index",
    "Customer Id",
    "First Name",
    "Last Name",
    "Company",
    "City",
    "Country",
    "Phone 1",
    "Phone 2",
    "Email",
    "Subscription Date",
    "Website",
)

# Fields are nullable (though never null) so batches compare and concatenate
# cleanly with tables read back from CSV, which are always nullable.
CUSTOMER_SCHEMA: pa.Schema = pa.schema(
    [pa.field("Index", pa.int64())] + [pa.field(name, pa.string()) for name in CUSTOMER_COLUMNS[1:]]
)

# --------------------------------------------------------------------------- vocabularies

# fmt: off
FIRST_NAMES: tuple[str, ...] = (
    "Aaron", "Abigail", "Adam", "Adrian", "Aimee", "Alan", "Albert", "Alejandro", "Alexa",
    "Alexander", "Alexis", "Alicia", "Alison", "Allison", "Alyssa", "Amanda", "Amber", "Amy",
    "Ana", "Andre", "André", "Andrea", "Andrew", "Angel", "Angela", "Anita", "Ann", "Anna",
    "Anne", "Anthony", "Antonio", "April", "Ariel", "Arthur", "Ashley", "Audrey", "Austin",
    "Autumn", "Bailey", "Barbara", "Barry", "Becky", "Belinda", "Benjamin", "Bernard", "Beth",
    "Betty", "Beverly", "Bill", "Billy", "Blake", "Bob", "Bobby", "Bonnie", "Brad", "Bradley",
    "Brandi", "Brandon", "Brenda", "Brendan", "Brent", "Brett", "Brian", "Brianna", "Bridget",
    "Brittany", "Brooke", "Bruce", "Bryan", "Caleb", "Calvin", "Cameron", "Candice", "Carl",
    "Carla", "Carlos", "Carmen", "Carol", "Caroline", "Carrie", "Casey", "Cassandra",
    "Catherine", "Cathy", "Chad", "Charles", "Charlotte", "Chase", "Chelsea", "Cheryl",
    "Chloé", "Chris", "Christian", "Christina", "Christine", "Christopher", "Cindy", "Claire",
    "Clayton", "Cody", "Colin", "Collin", "Connie", "Corey", "Courtney", "Craig", "Crystal",
    "Curtis", "Cynthia", "Dakota", "Dale", "Dalton", "Dana", "Daniel", "Danielle", "Danny",
    "Darius", "Darlene", "Darren", "Darryl", "David", "Dawn", "Dean", "Deanna", "Debbie",
    "Deborah", "Denise", "Dennis", "Derek", "Derrick", "Desiree", "Destiny", "Devin", "Diana",
    "Diane", "Dominic", "Don", "Donald", "Donna", "Dorothy", "Douglas", "Dustin", "Dylan",
    "Earl", "Eddie", "Edgar", "Edward", "Eileen", "Elaine", "Elijah", "Elizabeth", "Ellen",
    "Emily", "Emma", "Eric", "Erica", "Erik", "Erin", "Ernest", "Ethan", "Eugene", "Evan",
    "Evelyn", "Felicia", "Frances", "Francisco", "Frank", "Gabriel", "Gabriela", "Gail",
    "Garrett", "Gary", "George", "Gerald", "Gina", "Glen", "Glenn", "Gloria", "Grace", "Greg",
    "Gregory", "Hailey", "Haley", "Hannah", "Harold", "Hayley", "Heather", "Heidi", "Helen",
    "Henry", "Holly", "Hunter", "Isaac", "Isabel", "Ivan", "Jack", "Jackie", "Jacob",
    "Jacqueline", "Jaime", "James", "Jamie", "Jane", "Janet", "Janice", "Jared", "Jasmine",
    "Jason", "Javier", "Jay", "Jean", "Jeffery", "Jeffrey", "Jenna", "Jennifer", "Jeremy",
    "Jerry", "Jesse", "Jessica", "Jill", "Jimmy", "Joanna", "Jodi", "Joe", "Joel", "John",
    "Johnny", "Jon", "Jonathan", "Jordan", "Jorge", "José", "Joseph", "Joshua", "Joy", "Joyce",
    "Juan", "Judith", "Julia", "Julie", "Justin", "Kaitlyn", "Karen", "Kari", "Katelyn",
    "Katherine", "Kathleen", "Kathy", "Katie", "Kayla", "Keith", "Kelly", "Kendra", "Kenneth",
    "Kerry", "Kevin", "Kim", "Kimberly", "Kirk", "Kristen", "Kristin", "Kurt", "Kyle", "Lance",
    "Larry", "Latoya", "Laura", "Lauren", "Leah", "Lee", "Leslie", "Linda", "Lindsay", "Lisa",
    "Logan", "Lori", "Louis", "Lucas", "Luis", "Luke", "Madison", "Malik", "Mandy", "Marc",
    "Marcus", "Margaret", "Maria", "Marie", "Mario", "Mark", "Marvin", "Mary", "Mason",
    "Matthew", "Megan", "Melanie", "Melissa", "Michael", "Michele", "Michelle", "Miguel",
    "Mike", "Miranda", "Misty", "Molly", "Monica", "Morgan", "Nancy", "Natalie", "Nathan",
    "Neil", "Nicholas", "Nicole", "Noah", "Norman", "Olivia", "Omar", "Pamela", "Patricia",
    "Patrick", "Paul", "Paula", "Peggy", "Preston", "Priscilla", "Rachel", "Ralph", "Randy",
    "Raymond", "Rebecca", "Regina", "Renée", "Rhonda", "Ricardo", "Richard", "Ricky", "Robert",
    "Robin", "Rodney", "Roger", "Ronald", "Ross", "Roy", "Ruben", "Russell", "Ruth", "Ryan",
    "Sabrina", "Samantha", "Samuel", "Sandra", "Sara", "Sarah", "Scott", "Sean", "Seth",
    "Shane", "Shannon", "Sharon", "Shawn", "Sheila", "Shelby", "Sheryl", "Sierra", "Sonia",
    "Sophia", "Stacy", "Stanley", "Stephanie", "Stephen", "Steve", "Steven", "Susan", "Sydney",
    "Tamara", "Tammy", "Tanya", "Tara", "Taylor", "Teresa", "Terry", "Theresa", "Thomas",
    "Tiffany", "Timothy", "Tina", "Todd", "Tom", "Tommy", "Toni", "Tony", "Tracy", "Travis",
    "Trevor", "Troy", "Tyler", "Valerie", "Vanessa", "Victor", "Victoria", "Vincent",
    "Virginia", "Walter", "Wanda", "Wayne", "Wendy", "Whitney", "William", "Xavier",
    "Yolanda", "Yvonne", "Zachary", "Zoë",
)

LAST_NAMES: tuple[str, ...] = (
    "Acevedo", "Acosta", "Adams", "Aguilar", "Alexander", "Allen", "Alvarado", "Andersen",
    "Anderson", "Andrade", "Archer", "Arellano", "Armstrong", "Arnold", "Atkins", "Avila",
    "Bailey", "Baird", "Baker", "Baldwin", "Ball", "Banks", "Barajas", "Barber", "Barker",
    "Barnes", "Barrera", "Barron", "Barry", "Bartlett", "Bass", "Bates", "Baxter", "Beard",
    "Beck", "Becker", "Bell", "Bender", "Benitez", "Benson", "Berger", "Berry", "Bird",
    "Blackburn", "Blackwell", "Blair", "Blake", "Blankenship", "Bolton", "Bond", "Booker",
    "Bowen", "Boyd", "Bradley", "Brady", "Brennan", "Brewer", "Bridges", "Brock", "Brooks",
    "Browning", "Bryant", "Buchanan", "Burgess", "Burke", "Burnett", "Bush", "Byrd",
    "Calderon", "Calhoun", "Callahan", "Campos", "Cannon", "Cantrell", "Cardenas", "Carey",
    "Carr", "Carrillo", "Carson", "Castaneda", "Chambers", "Chandler", "Chang", "Chapman",
    "Chavez", "Christensen", "Church", "Clarke", "Cobb", "Cochran", "Coffey", "Cohen",
    "Colon", "Combs", "Conner", "Conrad", "Contreras", "Conway", "Cortez", "Cox", "Crane",
    "Crawford", "Cross", "Cruz", "Cummings", "Curtis", "D'Amico", "Dalton", "Daniel",
    "Daugherty", "Davenport", "Dawson", "Day", "Decker", "Delacruz", "Delgado", "Dennis",
    "Dickson", "Dixon", "Dodson", "Dominguez", "Donovan", "Dougherty", "Downs", "Doyle",
    "Duarte", "Dudley", "Duffy", "Duncan", "Durham", "Dyer", "Eaton", "Elliott", "Ellison",
    "Erickson", "Espinoza", "Estes", "Evans", "Farrell", "Ferguson", "Fernandez", "Fischer",
    "Fitzgerald", "Fleming", "Fletcher", "Flores", "Flynn", "Foley", "Forbes", "Ford",
    "Fowler", "Francis", "Franco", "Frazier", "Friedman", "Frost", "Fuentes", "Fuller",
    "Gallagher", "Galloway", "Garner", "Garrison", "Gentry", "Gibbs", "Gibson", "Giles",
    "Gill", "Glass", "Glover", "Golden", "Goodman", "Goodwin", "Gordon", "Graves", "Gray",
    "Greer", "Griffith", "Guerra", "Gutierrez", "Haley", "Hall", "Hamilton", "Hammond",
    "Hampton", "Hancock", "Hardin", "Harmon", "Harper", "Harrell", "Hartman", "Hawkins",
    "Hayden", "Haynes", "Henderson", "Hensley", "Herman", "Hess", "Hickman", "Hobbs",
    "Hodge", "Hogan", "Holden", "Holland", "Holloway", "Holt", "Hood", "Horne", "Houston",
    "Howell", "Huber", "Huerta", "Huff", "Humphrey", "Hurst", "Ingram", "Jacobson", "Jarvis",
    "Jennings", "Jensen", "Juarez", "Kane", "Kaufman", "Keller", "Kemp", "Kerr", "Khan",
    "Kidd", "Kirby", "Kline", "Knapp", "Knox", "Koch", "Lamb", "Lang", "Larsen", "Lawrence",
    "Lawson", "Le", "Leach", "Lester", "Levy", "Lin", "Lindsey", "Livingston", "Lloyd",
    "Logan", "Lozano", "Lucero", "Lynch", "Lyons", "Macdonald", "Mack", "Maddox", "Mahoney",
    "Maldonado", "Mann", "Marks", "Marquez", "Martin", "Mata", "Mathews", "Maxwell", "Mayer",
    "Mcbride", "Mcconnell", "Mcdaniel", "Mcguire", "Mckee", "Mcmillan", "Meadows", "Medina",
    "Melendez", "Mercer", "Merritt", "Meyers", "Miles", "Mitchell", "Molina", "Montes",
    "Montgomery", "Moody", "Moran", "Mosley", "Moss", "Mueller", "Müller", "Mullen", "Murillo",
    "Murray", "Nash", "Navarro", "Nelson", "Newman", "Nguyen", "Nichols", "Nixon", "Novak",
    "O'Brien", "O'Connell", "O'Connor", "O'Donnell", "O'Neal", "Ochoa", "Oconnor", "Olsen",
    "Orozco", "Ortega", "Osborne", "Owens", "Pace", "Pacheco", "Padilla", "Park", "Parsons",
    "Patel", "Patrick", "Patton", "Peck", "Pena", "Perry", "Pham", "Pineda", "Pittman",
    "Pollard", "Poole", "Potts", "Pratt", "Preston", "Proctor", "Pruitt", "Quinn", "Ramsey",
    "Rasmussen", "Reese", "Reeves", "Reid", "Reilly", "Rhodes", "Rich", "Riddle", "Rivas",
    "Roach", "Robbins", "Rocha", "Rojas", "Rollins", "Roman", "Rowe", "Rowland", "Russo",
    "Salas", "Sanford", "Sawyer", "Schaefer", "Schmitt", "Schneider", "Schroeder", "Schwartz",
    "Serrano", "Shaffer", "Shah", "Shea", "Shepherd", "Short", "Simon", "Singh", "Skinner",
    "Sloan", "Small", "Smith", "Snow", "Snyder", "Solis", "Sosa", "Spears", "Spence", "Stafford",
    "Stanton", "Steele", "Stein", "Stephenson", "Stevens", "Stokes", "Strickland", "Sullivan",
    "Summers", "Sutton", "Swanson", "Tanner", "Tate", "Terrell", "Thornton", "Todd", "Townsend",
    "Tran", "Trevino", "Tucker", "Turner", "Underwood", "Valdez", "Vance", "Vang", "Vaughn",
    "Vega", "Velasquez", "Villa", "Villanueva", "Vincent", "Wade", "Wagner", "Walls", "Walsh",
    "Walter", "Waters", "Watkins", "Weaver", "Webster", "Weeks", "Wells", "Whitaker", "Wiley",
    "Wilkins", "Winters", "Wise", "Wolfe", "Woodard", "Woods", "Wu", "Wyatt", "Yang", "Yates",
    "Yoder", "Young", "Yu", "Zamora", "Zhang", "Zimmerman", "Zuniga",
)

# Faker-style city parts: "East Leonard", "Chavezborough", "Lake Ana", "Bensonview".
CITY_PREFIXES: tuple[str, ...] = ("North", "East", "West", "South", "New", "Lake", "Port")
CITY_SUFFIXES: tuple[str, ...] = (
    "town", "ton", "land", "ville", "berg", "burgh", "borough", "bury", "view", "port",
    "mouth", "stad", "furt", "chester", "fort", "haven", "side", "shire",
)

COUNTRIES: tuple[str, ...] = (
    "Afghanistan", "Albania", "Algeria", "American Samoa", "Andorra", "Angola", "Anguilla",
    "Antarctica (the territory South of 60 deg S)", "Antigua and Barbuda", "Argentina",
    "Armenia", "Aruba", "Australia", "Austria", "Azerbaijan", "Bahamas", "Bahrain",
    "Bangladesh", "Barbados", "Belarus", "Belgium", "Belize", "Benin", "Bermuda", "Bhutan",
    "Bolivia", "Bosnia and Herzegovina", "Botswana", "Bouvet Island (Bouvetoya)", "Brazil",
    "British Indian Ocean Territory (Chagos Archipelago)", "British Virgin Islands",
    "Brunei Darussalam", "Bulgaria", "Burkina Faso", "Burundi", "Cambodia", "Cameroon",
    "Canada", "Cape Verde", "Cayman Islands", "Central African Republic", "Chad", "Chile",
    "China", "Christmas Island", "Cocos (Keeling) Islands", "Colombia", "Comoros", "Congo",
    "Cook Islands", "Costa Rica", "Cote d'Ivoire", "Croatia", "Cuba", "Cyprus",
    "Czech Republic", "Denmark", "Djibouti", "Dominica", "Dominican Republic", "Ecuador",
    "Egypt", "El Salvador", "Equatorial Guinea", "Eritrea", "Estonia", "Ethiopia",
    "Falkland Islands (Malvinas)", "Faroe Islands", "Fiji", "Finland", "France",
    "French Guiana", "French Polynesia", "French Southern Territories", "Gabon", "Gambia",
    "Georgia", "Germany", "Ghana", "Gibraltar", "Greece", "Greenland", "Grenada",
    "Guadeloupe", "Guam", "Guatemala", "Guernsey", "Guinea", "Guinea-Bissau", "Guyana",
    "Haiti", "Heard Island and McDonald Islands", "Holy See (Vatican City State)",
    "Honduras", "Hong Kong", "Hungary", "Iceland", "India", "Indonesia", "Iran", "Iraq",
    "Ireland", "Isle of Man", "Israel", "Italy", "Jamaica", "Japan", "Jersey", "Jordan",
    "Kazakhstan", "Kenya", "Kiribati", "Korea", "Kuwait", "Kyrgyz Republic",
    "Lao People's Democratic Republic", "Latvia", "Lebanon", "Lesotho", "Liberia",
    "Libyan Arab Jamahiriya", "Liechtenstein", "Lithuania", "Luxembourg", "Macao",
    "Madagascar", "Malawi", "Malaysia", "Maldives", "Mali", "Malta", "Marshall Islands",
    "Martinique", "Mauritania", "Mauritius", "Mayotte", "Mexico", "Micronesia", "Moldova",
    "Monaco", "Mongolia", "Montenegro", "Montserrat", "Morocco", "Mozambique", "Myanmar",
    "Namibia", "Nauru", "Nepal", "Netherlands", "Netherlands Antilles", "New Caledonia",
    "New Zealand", "Nicaragua", "Niger", "Nigeria", "Niue", "Norfolk Island",
    "North Macedonia", "Northern Mariana Islands", "Norway", "Oman", "Pakistan", "Palau",
    "Palestinian Territory", "Panama", "Papua New Guinea", "Paraguay", "Peru", "Philippines",
    "Pitcairn Islands", "Poland", "Portugal", "Puerto Rico", "Qatar", "Reunion", "Romania",
    "Russian Federation", "Rwanda", "Saint Barthelemy", "Saint Helena",
    "Saint Kitts and Nevis", "Saint Lucia", "Saint Martin", "Saint Pierre and Miquelon",
    "Saint Vincent and the Grenadines", "Samoa", "San Marino", "Sao Tome and Principe",
    "Saudi Arabia", "Senegal", "Serbia", "Seychelles", "Sierra Leone", "Singapore",
    "Slovakia (Slovak Republic)", "Slovenia", "Solomon Islands", "Somalia", "South Africa",
    "South Georgia and the South Sandwich Islands", "Spain", "Sri Lanka", "Sudan",
    "Suriname", "Svalbard & Jan Mayen Islands", "Swaziland", "Sweden", "Switzerland",
    "Syrian Arab Republic", "Taiwan", "Tajikistan", "Tanzania", "Thailand", "Timor-Leste",
    "Togo", "Tokelau", "Tonga", "Trinidad and Tobago", "Tunisia", "Turkey", "Turkmenistan",
    "Turks and Caicos Islands", "Tuvalu", "Uganda", "Ukraine", "United Arab Emirates",
    "United Kingdom", "United States Minor Outlying Islands", "United States of America",
    "United States Virgin Islands", "Uruguay", "Uzbekistan", "Vanuatu", "Venezuela",
    "Vietnam", "Virgin Islands, British", "Virgin Islands, U.S.", "Wallis and Futuna",
    "Western Sahara", "Yemen", "Zambia", "Zimbabwe",
)

COMPANY_SUFFIXES: tuple[str, ...] = ("Inc", "Group", "LLC", "Ltd", "PLC", "and Sons")
# For the rare quoted-name style, e.g. '"Vega" Holdings' or 'Wells "Analytics" LLC'.
COMPANY_NOUNS: tuple[str, ...] = (
    "Holdings", "Partners", "Analytics", "Logistics", "Ventures", "Solutions", "Labs",
    "Consulting", "Capital", "Systems",
)
EMAIL_TLDS: tuple[str, ...] = ("com", "com", "com", "net", "org", "info", "biz")
FREE_EMAIL_DOMAINS: tuple[str, ...] = ("gmail.com", "yahoo.com", "hotmail.com")
# fmt: on

# Subscription dates are uniform over 2020-01-01 .. 2022-12-31 inclusive.
_DATE_START_DAYS = 18262  # 2020-01-01 as days since 1970-01-01
_DATE_SPAN_DAYS = 1096  # 366 + 365 + 365

# ------------------------------------------------------------------- counter-based draws

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def _splitmix64_int(x: int) -> int:
    """Scalar SplitMix64 finaliser on Python ints (used to derive keys)."""
    x = (x + _GOLDEN) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """Vectorised SplitMix64 finaliser; uint64 arithmetic wraps, which is intended."""
    x = x + np.uint64(_GOLDEN)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


class _RowDraws:
    """Independent 64-bit draws per row, keyed by (seed, Index, stream).

    Streams are numbered in call order, so the code below must draw in a fixed
    order; the values of one row never depend on which other rows are in the batch.
    """

    def __init__(self, index: np.ndarray, seed: int) -> None:
        seed_key = np.uint64(_splitmix64_int(seed & _MASK64))
        self._row_keys = _splitmix64(_splitmix64(index.astype(np.uint64)) ^ seed_key)
        self._stream = 0

    def __len__(self) -> int:
        return len(self._row_keys)

    def bits(self) -> np.ndarray:
        self._stream += 1
        stream_key = np.uint64(_splitmix64_int(self._stream * 0xD1B54A32D192ED03 & _MASK64))
        return _splitmix64(self._row_keys ^ stream_key)

    def below(self, n: int) -> np.ndarray:
        """Uniform ints in [0, n) (multiply-shift on the top 32 bits; n < 2**32)."""
        return ((self.bits() >> np.uint64(32)) * np.uint64(n)) >> np.uint64(32)

    def weighted(self, weights: Sequence[int]) -> np.ndarray:
        """Index into ``weights`` with probability proportional to each weight."""
        cumulative = np.cumsum(np.asarray(weights, dtype=np.uint64))
        return np.searchsorted(cumulative, self.below(int(cumulative[-1])), side="right")

    def digits(self, count: int) -> np.ndarray:
        """A (rows, count) uint8 matrix of ASCII decimal digits."""
        columns: list[np.ndarray] = []
        while len(columns) < count:
            word = self.bits()
            for _ in range(min(19, count - len(columns))):  # 10**19 < 2**64
                columns.append((word % np.uint64(10)).astype(np.uint8) + np.uint8(48))
                word = word // np.uint64(10)
        return np.stack(columns, axis=1) if columns else np.empty((len(self), 0), np.uint8)


# ----------------------------------------------------------------------- arrow helpers


def _fixed_width_strings(chars: np.ndarray) -> pa.Array:
    """Turn a (rows, width) uint8 matrix of ASCII bytes into a string array, zero-copy."""
    rows, width = chars.shape
    data = np.ascontiguousarray(chars, dtype=np.uint8)
    offsets = np.arange(rows + 1, dtype=np.int32) * np.int32(width)
    return pa.Array.from_buffers(
        pa.string(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )


def _pattern_strings(pattern: str, digits: np.ndarray) -> pa.Array:
    """Fill each '#' of an ASCII ``pattern`` with the next digit column, e.g. '(###)###-####'."""
    template = np.frombuffer(pattern.encode("ascii"), dtype=np.uint8)
    chars = np.broadcast_to(template, (digits.shape[0], template.size)).copy()
    slots = np.flatnonzero(template == ord("#"))
    chars[:, slots] = digits[:, : slots.size]
    return _fixed_width_strings(chars)


def _join(*parts: pa.Array | str) -> pa.Array:
    return pc.binary_join_element_wise(*parts, "")


def _choose(which: np.ndarray, *options: pa.Array) -> pa.Array:
    return pc.choose(pa.array(which.astype(np.int8)), *options)


def _email_slug(name: str) -> str:
    """'O'Brien' -> 'obrien', 'José' -> 'jose': what a mail provider would accept."""
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    return "".join(ch for ch in ascii_name.lower() if ch.isalnum())


_FIRST = pa.array(FIRST_NAMES, pa.string())
_LAST = pa.array(LAST_NAMES, pa.string())
_FIRST_SLUG = pa.array([_email_slug(n) for n in FIRST_NAMES], pa.string())
_LAST_SLUG = pa.array([_email_slug(n) for n in LAST_NAMES], pa.string())
_CITY_PREFIX = pa.array(CITY_PREFIXES, pa.string())
_CITY_SUFFIX = pa.array(CITY_SUFFIXES, pa.string())
_COUNTRY = pa.array(COUNTRIES, pa.string())
_COMPANY_SUFFIX = pa.array(COMPANY_SUFFIXES, pa.string())
_COMPANY_NOUN = pa.array(COMPANY_NOUNS, pa.string())
_TLD = pa.array(EMAIL_TLDS, pa.string())
_FREE_DOMAIN = pa.array(FREE_EMAIL_DOMAINS, pa.string())
_HEX = np.frombuffer(b"0123456789abcdef0123456789ABCDEF", dtype=np.uint8)
_PHONE_PATTERNS = (
    "###-###-####",
    "(###)###-####",
    "###.###.####",
    "+1-###-###-####",
    "001-###-###-####",
    "##########",
)


def _pick(values: pa.Array, draws: _RowDraws) -> pa.Array:
    return values.take(pa.array(draws.below(len(values))))


# ------------------------------------------------------------------------- columns


def _customer_ids(draws: _RowDraws) -> pa.Array:
    # 15 mixed-case hex characters such as "DD37Cf93aecA6Dc".
    # Work on uint8 views of the 64-bit draws: two nibbles per byte, one case bit per char.
    rows = len(draws)
    nibble_bytes = draws.bits().astype("<u8").view(np.uint8).reshape(rows, 8)
    nibbles = np.empty((rows, 16), np.uint8)
    nibbles[:, 0::2] = nibble_bytes >> 4
    nibbles[:, 1::2] = nibble_bytes & 15
    case_bytes = draws.bits().astype("<u8").view(np.uint8).reshape(rows, 8)
    upper = np.unpackbits(case_bytes, axis=1)[:, :15]
    return _fixed_width_strings(_HEX[nibbles[:, :15] | (upper << 4)])


def _company(draws: _RowDraws) -> pa.Array:
    # Faker's three styles ("Conner Ltd", "Wells-Yates", "Vega, Gibson and Rowland")
    # plus a rare style with embedded double quotes so CSV quoting is exercised.
    style = draws.weighted([40, 30, 27, 3])
    a = _pick(_LAST, draws)
    b = _pick(_LAST, draws)
    c = _pick(_LAST, draws)
    suffix = _pick(_COMPANY_SUFFIX, draws)
    noun = _pick(_COMPANY_NOUN, draws)
    quoted_first = draws.below(2).astype(bool)
    quoted = pc.if_else(
        pa.array(quoted_first),
        _join('"', a, '" ', noun),  # "Vega" Holdings
        _join(a, ' "', noun, '" ', suffix),  # Wells "Analytics" LLC
    )
    return _choose(
        style,
        _join(a, " ", suffix),
        _join(a, "-", b),
        _join(a, ", ", b, " and ", c),
        quoted,
    )


def _city(draws: _RowDraws) -> pa.Array:
    style = draws.below(4)
    prefix = _pick(_CITY_PREFIX, draws)
    suffix = _pick(_CITY_SUFFIX, draws)
    first = _pick(_FIRST, draws)
    last = _pick(_LAST, draws)
    return _choose(
        style,
        _join(prefix, " ", first, suffix),  # East Jimmychester
        _join(prefix, " ", first),  # Lake Ana
        _join(first, suffix),  # Kimport
        _join(last, suffix),  # Chavezborough
    )


def _phone(draws: _RowDraws) -> pa.Array:
    style = draws.below(len(_PHONE_PATTERNS))
    digits = draws.digits(10)
    number = _choose(style, *(_pattern_strings(p, digits) for p in _PHONE_PATTERNS))
    # About 40% carry an extension of 3-5 digits: "397.884.0519x718".
    extension_style = draws.weighted([60, 14, 13, 13])
    ext_digits = draws.digits(5)
    rows = ext_digits.shape[0]
    extension = _choose(
        extension_style,
        _fixed_width_strings(np.empty((rows, 0), np.uint8)),
        _pattern_strings("x###", ext_digits),
        _pattern_strings("x####", ext_digits),
        _pattern_strings("x#####", ext_digits),
    )
    return _join(number, extension)


def _email(draws: _RowDraws) -> pa.Array:
    # Independent of the row's own name, as in the original file: "zunigavanessa@smith.info".
    style = draws.below(4)
    first = _pick(_FIRST_SLUG, draws)
    last = _pick(_LAST_SLUG, draws)
    number = pc.cast(pa.array(draws.below(100)), pa.string())
    user = _choose(
        style,
        _join(last, first),  # zunigavanessa
        _join(pc.utf8_slice_codeunits(first, 0, 1), last),  # vmata
        _join(first, last),  # beckycarr
        _join(first, number),  # louis27
    )
    domain_last = _pick(_LAST_SLUG, draws)
    tld = _pick(_TLD, draws)
    free = _pick(_FREE_DOMAIN, draws)
    use_free = draws.below(5) == 0
    domain = pc.if_else(pa.array(use_free), free, _join(domain_last, ".", tld))
    return _join(user, "@", domain)


def _website(draws: _RowDraws) -> pa.Array:
    style = draws.below(4)
    a = _pick(_LAST_SLUG, draws)
    b = _pick(_LAST_SLUG, draws)
    tld = _pick(_TLD, draws)
    scheme = pc.if_else(pa.array(draws.below(2) == 0), pa.scalar("http://"), pa.scalar("https://"))
    host = _choose(
        style,
        _join("www.", a, ".com"),  # www.stephenson.com
        _join(a, "-", b, ".com"),  # goodwin-ingram.com
        _join("www.", a, ".", tld),  # www.berger.net
        _join(a, ".", tld),
    )
    return _join(scheme, host, "/")


def _subscription_date(draws: _RowDraws) -> pa.Array:
    days = (draws.below(_DATE_SPAN_DAYS) + np.uint64(_DATE_START_DAYS)).astype(np.int32)
    return pa.array(days, pa.int32()).cast(pa.date32()).cast(pa.string())


# ---------------------------------------------------------------------------- public


def customers_batch(start: int, stop: int, seed: int = 0) -> pa.Table:
    """Rows ``start`` .. ``stop - 1`` (0-based) of the synthetic customers file.

    The ``Index`` column is 1-based like the original file, so the batch holds
    Index ``start + 1`` .. ``stop``. A row depends only on ``(seed, Index)``:
    ``customers_batch(0, 100)`` equals ``customers_batch(0, 37)`` followed by
    ``customers_batch(37, 100)``.

    Returns a table with :data:`CUSTOMER_SCHEMA` (Index int64, all else string).
    """
    if start < 0 or stop < start:
        raise ValueError(f"need 0 <= start <= stop, got start={start}, stop={stop}")
    index = np.arange(start + 1, stop + 1, dtype=np.int64)
    draws = _RowDraws(index, seed)
    # Draw order is part of the data definition: reordering these calls changes every row.
    columns: list[pa.Array] = [
        pa.array(index, pa.int64()),
        _customer_ids(draws),
        _pick(_FIRST, draws),
        _pick(_LAST, draws),
        _company(draws),
        _city(draws),
        _pick(_COUNTRY, draws),
        _phone(draws),
        _phone(draws),
        _email(draws),
        _subscription_date(draws),
        _website(draws),
    ]
    return pa.Table.from_arrays(columns, schema=CUSTOMER_SCHEMA)


def write_customers_csv(
    path: str | os.PathLike[str],
    rows: int,
    seed: int = 0,
    chunk_rows: int = 100_000,
) -> pathlib.Path:
    """Write ``rows`` synthetic customers to a CSV file at ``path`` and return its path.

    Chunks of ``chunk_rows`` are generated and streamed through
    :class:`pyarrow.csv.CSVWriter`, so memory stays flat whatever ``rows`` is.
    The header is written once; string values are quoted (Arrow's default
    "needed" style quotes every string), with embedded quotes doubled.
    Parent directories are created. The file appears under its final name only
    once complete, so a reader never sees a half-written file.
    """
    if rows < 0:
        raise ValueError(f"rows must be >= 0, got {rows}")
    if chunk_rows <= 0:
        raise ValueError(f"chunk_rows must be > 0, got {chunk_rows}")
    target = pathlib.Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    # Unique per call, so concurrent writers of one path never share a partial file.
    partial = target.with_name(f".{target.name}.{uuid.uuid4().hex[:12]}.partial")
    try:
        with pacsv.CSVWriter(partial, CUSTOMER_SCHEMA) as writer:
            for chunk_start in range(0, rows, chunk_rows):
                chunk_stop = min(rows, chunk_start + chunk_rows)
                writer.write_table(customers_batch(chunk_start, chunk_stop, seed))
        os.replace(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return target
