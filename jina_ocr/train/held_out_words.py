"""Everyday English words that no training page ever prints: the words of the held-out reading pages.

The training pages draw their words from the synth vocabulary (technical terms), from nonsense words built
of syllables and from numbers; a nonsense word that happens to equal one of these is drawn again
(:func:`jina_ocr.train.drills.drill_word`). A model that transcribes these words has read them.
"""

HELD_OUT_WORDS = tuple(
    """
    garden river window kitchen yellow morning silver blanket candle harbor meadow pocket ladder
    orange pencil basket bridge cotton dinner engine feather forest ginger hammer island jacket
    kettle lemon mirror needle ocean pepper pillow rabbit saddle tiger tunnel velvet wagon zebra
    apple butter carpet desert finger goose honey insect jungle kitten lizard monkey nickel onion
    parrot quilt rocket shadow thunder umbrella violin walnut anchor bottle castle dragon falcon
    garlic helmet iron jelly lantern marble napkin oyster pebble raven sugar turtle village whistle
    cabin circus cradle daisy donkey eagle fabric fossil gravel hollow kennel lobster mitten muffin
    puppet riddle salmon sponge tulip waffle acorn badger bucket cherry clover copper dolphin
    flannel goblet hazel ivory juniper lilac mango nutmeg orchid pewter plum quiver rhubarb
    scarlet tinsel walrus wizard almond beacon bramble canyon cobalt dune ember fern glove grove
    hornet iris jasmine kiwi locket maple nectar olive pasture pumpkin quail rosemary saffron
    sparrow thistle trumpet willow wool barley bison cinder crimson dusk elbow fiddle gazelle
    heron igloo jigsaw kayak lagoon marsh noodle otter peach pigeon quartz raisin satchel squirrel
    teapot tractor vase wren blossom breeze brook cellar chimney cocoa crayon cricket daffodil
    dimple drizzle fable fig frost giggle gully hedge hiccup jolly kindle lollipop mellow mossy
    nimble nugget pancake pickle plaid porch ribbon rusty sandal sleepy snowy sunny tidy toasty
    wobble cozy dainty fluffy gentle happy merry quiet swift brave calm eager fancy glad hungry
    jumpy lucky plucky rosy shiny sweet witty zesty bake borrow carry dance dream gather hum jog
    knit laugh mend paint plant roam sing skip stitch swim travel wander whisper wink yawn
    """.split()
)
